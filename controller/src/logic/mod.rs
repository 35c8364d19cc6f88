//! Pure controller decisions (placeholder; being written). See the module plan in the lead's
//! notes: every operation is `fn(&MetadataImage, request, now_ms) -> Result<ControllerResult<R>, ...>`.
