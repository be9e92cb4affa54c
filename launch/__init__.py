"""Pure planning: the run spec, its validation, GPU placement and rendering. No side effects."""
