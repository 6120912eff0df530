"""Pure DataFrame -> DataFrame functions: no I/O, no session state beyond the frames given."""
