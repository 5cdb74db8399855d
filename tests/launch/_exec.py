"""``python -m tests.launch._exec -c CODE [ignored...]``: runs CODE (launcher tests)."""

import sys

if __name__ == "__main__":
    exec(compile(sys.argv[2], "<launcher-test>", "exec"))
