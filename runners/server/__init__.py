"""The engine server: what a launch is (`launch_spec`), bringing it up and tearing it down
(`launch`, with the command it runs in `server_command`, the `readiness` wait, the in-progress
`launch_state` and the `process_group` stop), the Docker Engine API (`docker_engine`,
`docker_image`, `docker_container`), free `ports`, and Prometheus scraping (`scrape`, parsing
the page in `exposition`, its samples in our keys in `engine_metrics`).
"""
