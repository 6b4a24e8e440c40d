# Placeholder until the web-app issue ships the real image (non-root user, healthcheck,
# Docker CLI for sibling engine containers). It runs the app on the bundled sample.
FROM python:3.11.7-slim
WORKDIR /opt/servefit
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
ENV PYTHONPATH=/opt/servefit
EXPOSE 8501
CMD ["python", "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", "8501", "--server.address", "0.0.0.0"]
