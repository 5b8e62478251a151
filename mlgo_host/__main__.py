import sys

from mlgo_host.cli import main

sys.exit(main())
