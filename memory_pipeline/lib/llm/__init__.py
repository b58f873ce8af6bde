from memory_pipeline.lib.llm.client import LLMClient, LLMHardFailure, LLMProviderDown, LLMRequest, LLMResult

__all__ = ["LLMClient", "LLMHardFailure", "LLMProviderDown", "LLMRequest", "LLMResult"]
