"""The ``qdrouterd`` entry point: command line, configuration file, reload, systemd
notification, and the supervision of the core, agent and worker processes."""
