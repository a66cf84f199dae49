import sys

from actlab.cli import main

sys.exit(main())
