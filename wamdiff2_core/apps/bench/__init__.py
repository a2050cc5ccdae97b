"""`wamdiff2 bench decode`: AR optimised vs diffusion reference vs diffusion fast."""
