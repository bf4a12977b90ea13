"""The applications on the desk: the CLI (customer and operator commands), drawing, evaluation, metrics, the demo
bank listing."""
