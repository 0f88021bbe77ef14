"""`lab doctor`: a multi-node job's misconfigurations named before a job runs (lab.cli.doctor)."""
