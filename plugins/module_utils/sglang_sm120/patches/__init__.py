"""The toolkit's source patches to SGLang: engine, manifest, lint, diff, the import check of a patched
release, and the EAGLE-3 audit of the target model class."""
