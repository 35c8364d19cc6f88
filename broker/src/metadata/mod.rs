//! Metadata tailer (being written): FetchMetadata -> local MetadataImage -> local changes.
