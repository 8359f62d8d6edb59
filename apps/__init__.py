"""malleable.apps: sample malleable applications (Jacobi heat equation, matrix multiply)."""
