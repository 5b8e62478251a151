"""The corpus floor: corpus format and building, compiling one module with a policy, sizes,
baselines and rewards (below the workers, above the policies)."""
