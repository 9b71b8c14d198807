"""The C/C++ frontend: clang driver, Enzyme's __enzyme_* interface, adapters, headers."""
