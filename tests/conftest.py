# The package is `snn` (the repository root, installed by `make setup`): tests import snn.codegen,
# snn.runtime and snn.cli, never the checkout's folders directly.
