"""Memory: tools and stores that remember what compaction moved out of the request."""
