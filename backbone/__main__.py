import sys

from backbone.cli import main

sys.exit(main())
