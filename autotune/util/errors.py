"""The one error family. Expected trial outcomes (OOM, crash, timeout, NaN) are states, not errors."""


class AutotuneError(Exception):
    """A real error: something autotune cannot go on from."""


class JobError(AutotuneError):
    """Bad user input. The message is one line naming the key and the accepted form."""


class RecordError(AutotuneError):
    """A record failed its schema, or a stored file is torn or corrupt."""


class DamagedRunError(RecordError, JobError):
    """A run folder's files are not what autotune wrote (edited, copied, torn): the input of `resume` or
    `review` is bad, so exit 2 like any bad input, with what to do instead."""
