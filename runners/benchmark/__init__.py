"""A live benchmark from start to end (`bench`, its `options`), its figures (`metrics`,
`boundary`), the results `store`, and how a run ends when told to (`shutdown`).
"""
