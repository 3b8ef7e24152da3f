"""The thesis's evaluation protocol, as constants the profile checks read without importing the evaluation code
(and torch with it) when a profile is loaded."""

THESIS_STRIDE = 256  # §3.4.5: "by fixing the stride length to 256" (strided perplexity of WikiText and PTB)
