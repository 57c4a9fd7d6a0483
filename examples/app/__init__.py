"""The example app of the README and docs/ (see ../README.md)."""
