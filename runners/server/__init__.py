"""The engine server: launch and teardown (`launch`, `docker_engine`), free `ports`, and Prometheus
scraping (`scrape`).
"""
