"""TinyAgent: a tiny coding agent, its gym, Chapter 9's GRPO and Chapter 10's regularizers."""
from .grpo import kl_penalty
from .regularize import kl_estimate
