"""One backend per database, each with the same anatomy (see actions/redis/)."""
