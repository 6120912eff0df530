"""Authentication and ACLs of the embedded broker (SPEC 6.2): the gates access.py names."""
