"""The 1bit catalog for Lemonade: entries, downloads into the Hugging Face cache, registration."""
