"""malleable.controller: scheduling policies, the discrete-event simulator and the controller daemon."""
