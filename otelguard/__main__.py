import sys

from otelguard.cli import main

sys.exit(main())
