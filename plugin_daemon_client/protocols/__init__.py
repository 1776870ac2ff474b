"""Wire protocols over the same streaming core: request builders and frame decoders."""
