"""Car Tag seed policies (pursuer and evader), vectorised over games."""
