"""The command line: the word grammar's entry, `autotune tune|suggest|kb ...`; a client of the API."""
