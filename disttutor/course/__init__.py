"""Tools that build, check and publish the course itself (not used inside a chapter)."""
