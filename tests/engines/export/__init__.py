"""Tests of the deployment bundle (`engines.export`) and of the manifests it writes."""
