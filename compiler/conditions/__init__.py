"""The condition language: grammar, parser, AST, evaluation (docs/conditions.md)."""
