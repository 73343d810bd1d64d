"""The shared kernel: the message contract, settings, resource names, errors, logs, metrics, AWS clients,
queue naming and link signing. Depends on nothing else of ours."""
