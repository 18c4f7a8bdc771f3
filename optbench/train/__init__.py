"""Training one trial: config and result contract, data, optimizer, loop, result files."""
