"""Runner integrations: each makes a runner use specops without edits to the runner (docs/integrations.md).

`specops.integrations.vllm` is a vLLM general plugin (docs/integrations.md). Nothing here is
imported by `import specops`; the runner's plugin loader imports it.
"""
