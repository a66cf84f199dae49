"""Built-in MuJoCo simulation: SO-101 pick-and-place, scripted expert, recorder into LeRobot v3."""
