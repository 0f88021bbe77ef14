"""Health: what each rank and each node agent reports, and the Prometheus that watches them."""
