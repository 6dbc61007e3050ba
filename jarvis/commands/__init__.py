"""click subcommands of `jarvis`; each module is imported only when its command runs."""
