# nanoGPT's "poor man's configurator", exec'd by nano_train.py: each argument is either a Python
# config file (exec'd) or --key=value, where value is a Python literal (or a bare string) of the
# same type as the global it overrides.
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if "=" not in arg:
        assert not arg.startswith("--"), arg
        print(f"Overriding config with {arg}:")
        exec(open(arg).read())
    else:
        assert arg.startswith("--"), arg
        key, val = arg.split("=", 1)
        key = key[2:]
        if key not in globals():
            raise ValueError(f"Unknown config key: {key}")
        try:
            attempt = literal_eval(val)
        except (SyntaxError, ValueError):
            attempt = val
        assert type(attempt) is type(globals()[key]), f"{key}: {attempt!r} is not a {type(globals()[key]).__name__}"
        print(f"Overriding: {key} = {attempt}")
        globals()[key] = attempt
