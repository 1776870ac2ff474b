"""The floor every layer shares, just above `locales`: the cancel token, the DSL
model base and its error mapping, durations, Dify's value types and file
object, the nesting and rendering bounds, the one redaction rule and the one
socket scope. It imports only `locales`; every other package may import it."""
