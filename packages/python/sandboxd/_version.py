"""The package version: the same as the TypeScript SDK's (packages/sdk/package.json)."""

__version__ = "0.3.0"
