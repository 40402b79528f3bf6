import sys

from .cli import main

# As the `jarvis` console script does: a command that ends with an exit code (click's
# Exit, which main returns) must end the process with it, not with 0.
code = main()
sys.exit(code if isinstance(code, int) else 0)
