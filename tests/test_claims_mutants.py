"""Tests written to kill the claims' surviving mutants (docs/mutation-testing.md): each checks a behaviour of
leanlm.claims that no other test pinned down."""
