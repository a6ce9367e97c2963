"""Using a trained model: predictors (segmentation, generators), input/output, export.

Kept free of imports so `framework.tasks` can use the segmentation predictor without a cycle."""
