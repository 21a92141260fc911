import sys
from pathlib import Path

# Tests import the project from the checkout (cli.py sits at the root, beside codegen/ and runtime/).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
