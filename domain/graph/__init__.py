"""Step graphs: explicit outcome graphs validated at load and run by ``StepGraph``."""
