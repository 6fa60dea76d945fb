"""The models: the catalog (which models, where, their profiles), GGUF loading through
llama-cpp-python (weights and vocabularies) and the engines wired from them."""
