from memory_pipeline.lib.llm.client import LLMClient, LLMHardFailure, LLMRequest, LLMResult

__all__ = ["LLMClient", "LLMHardFailure", "LLMRequest", "LLMResult"]
