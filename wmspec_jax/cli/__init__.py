"""Command-line tools: ``wmspec-generate`` (:mod:`.generate`) and ``wmspec-detect`` (:mod:`.detect`),
and the absl flags they share with the experiment scripts (:mod:`.flags`)."""


__all__ = []
