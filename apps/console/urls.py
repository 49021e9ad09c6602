"""Console pages: server-rendered shells whose actions call the operations over the REST door."""

urlpatterns: list = []
