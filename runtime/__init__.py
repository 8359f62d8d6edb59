"""malleable.runtime: Invasive-MPI-style adaptation verbs over MPI spawn and intercommunicators."""
