"""`firstgate serve`: Dify's Service API for a directory of exports, and the run console.

Layer: `serve -> runtime -> ...`; nothing below imports it."""
