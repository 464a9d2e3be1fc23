package guided

// TEMPORARY STUB until branch tag merges; deleted at merge.
const StructuralTag Kind = 100
