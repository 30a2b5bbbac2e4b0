"""The `flashscope` command line: one module per subcommand, `main` dispatches."""
